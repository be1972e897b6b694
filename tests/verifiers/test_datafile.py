"""verifiers.datafile: every data file fails as `path:line: message`: undecodable bytes, JSON, duplicate keys."""

from __future__ import annotations

import pytest

from verifiers.datafile import DataFileError, read_data


def test_non_utf8_bytes_name_their_line(tmp_path):
    f = tmp_path / "ctx.yaml"
    f.write_bytes(b"namespaces: [slack]\nid: \xff\n")
    with pytest.raises(DataFileError) as e:
        read_data(f)
    assert e.value.path == str(f) and e.value.line == 2 and "UTF-8" in e.value.message


def test_tab_indented_json_is_read_as_json(tmp_path):
    f = tmp_path / "ctx.json"
    f.write_text('{\n\t"id": "x",\n\t"namespaces": ["slack"]\n}\n')
    data, node, _ = read_data(f)
    assert data == {"id": "x", "namespaces": ["slack"]}
    assert node is not None  # line numbers for validation errors still work


def test_json_content_in_a_yaml_file_and_flow_yaml_both_load(tmp_path):
    j = tmp_path / "a.yaml"
    j.write_text('{\n\t"id": "x"\n}\n')
    assert read_data(j)[0] == {"id": "x"}
    y = tmp_path / "b.yaml"
    y.write_text("{id: x, namespaces: [slack]}\n")  # YAML flow style, not JSON
    assert read_data(y)[0] == {"id": "x", "namespaces": ["slack"]}


def test_bad_json_names_the_json_line(tmp_path):
    f = tmp_path / "ctx.json"
    f.write_text('{\n\t"id": "x",\n\t"namespaces": [slack]\n}\n')
    with pytest.raises(DataFileError) as e:
        read_data(f)
    assert e.value.line == 3 and "bad JSON" in e.value.message


@pytest.mark.parametrize("name,text,line", [
    ("ctx.yaml", "id: x\nnamespaces: [a]\nid: y\n", 3),
    ("ctx.yaml", "public:\n  id: x\n  nested: {a: 1}\n  id: y\n", 4),
    ("ctx.json", '{\n\t"id": "x",\n\t"id": "y"\n}\n', 3),
])
def test_duplicate_keys_are_rejected_with_their_line(tmp_path, name, text, line):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(DataFileError) as e:
        read_data(f)
    assert e.value.line == line and "duplicate key 'id'" in e.value.message


def test_same_key_in_different_mappings_and_aliases_are_fine(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("a: &base {id: 1}\nb: *base\nc: {id: 2}\nr: &r [*r]\n")
    data, _, _ = read_data(f)
    assert data["b"] == {"id": 1} and data["c"] == {"id": 2}


def test_a_byte_order_mark_is_not_content(tmp_path):
    f = tmp_path / "ctx.json"
    f.write_bytes(b'\xef\xbb\xbf{"id": "x"}')
    assert read_data(f)[0] == {"id": "x"}


def test_a_character_yaml_does_not_allow_is_bad_yaml_on_its_line(tmp_path):
    f = tmp_path / "ctx.yaml"
    f.write_bytes(b"id: x\nnamespaces: [a]\n\x00\n")
    with pytest.raises(DataFileError) as e:
        read_data(f)
    assert e.value.line == 3 and "unacceptable character" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name,text", [
    ("deep.json", '{"extra": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}"),
    ("deep.yaml", "extra:\n  x: " + "[" * 5_000 + "]" * 5_000 + "\n"),
])
def test_a_document_nested_thousands_deep_is_bad_input_not_a_crash(tmp_path, name, text):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(DataFileError, match="nested too deeply"):
        read_data(f)
