"""The OPA REST API through opa-python-client: upload policies, evaluate a document, check health.

Used only by guardrail.policy.server.OPAServer. It translates the client's errors into the project's tree:
a policy the server rejects becomes PolicyLoadError (file and line from OPA's error location); anything that
stops an evaluation (connection refused, timeout, a 4xx/5xx) becomes PolicyEngineError, on which the engine
fails closed.
"""

from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import urlsplit

import requests
from opa_client import OpaClient
from opa_client.errors import RegoParseError

from guardrail.errors import PolicyEngineError, PolicyLoadError

__all__ = ["OPARestClient", "UNDEFINED"]

UNDEFINED = object()  # the document has no value for this input (OPA answers {} with no "result")


class OPARestClient:
    """One OPA server, reached over its REST API."""

    def __init__(self, url: str, *, timeout_s: float = 1.0, retries: int = 0, token: str | None = None,
                 upload_timeout_s: float = 30.0):
        self.upload_timeout_s = upload_timeout_s
        parts = urlsplit(url if "://" in url else f"http://{url}")
        self.url = f"{parts.scheme}://{parts.hostname}:{parts.port or 8181}"
        self._client = OpaClient(host=parts.hostname or "localhost", port=parts.port or 8181,
                                 ssl=parts.scheme == "https", timeout=timeout_s, retries=retries, token=token)

    def put_policy(self, policy_id: str, source: str) -> None:
        """PUT /v1/policies/<id>. A compile error raises PolicyLoadError naming the module and line."""
        decide_timeout, self._client.timeout = self._client.timeout, self.upload_timeout_s
        try:
            self._client.update_policy_from_string(source, policy_id, rego_compat=False)
        except RegoParseError as e:
            loc = next((err.get("location") for err in e.errors if isinstance(err, dict) and err.get("location")),
                       None) or {}
            msg = next((err.get("message") for err in e.errors if isinstance(err, dict) and err.get("message")),
                       None) or str(e.message)
            raise PolicyLoadError(msg, path=loc.get("file") or policy_id, line=loc.get("row")) from e
        except (requests.RequestException, ValueError) as e:
            raise PolicyEngineError(f"OPA at {self.url}: cannot upload {policy_id}: {e}") from e
        finally:
            # A server compiles the whole policy set on each upload: slower than a decision, so a longer budget.
            self._client.timeout = decide_timeout

    def put_data(self, path: str, value: Mapping[str, Any]) -> None:
        decide_timeout, self._client.timeout = self._client.timeout, self.upload_timeout_s
        try:
            self._client.update_or_create_data(dict(value), path)
        except Exception as e:  # noqa: BLE001  (the client raises its own untyped errors for a rejected write)
            raise PolicyEngineError(f"OPA at {self.url}: cannot write data {path}: {e}") from e
        finally:
            self._client.timeout = decide_timeout

    def document(self, path: str, input: Any) -> Any:
        """POST /v1/data/<path> with {"input": ...}; the result, or UNDEFINED. Raises PolicyEngineError."""
        package, _, rule = path.strip("/").replace(".", "/").rpartition("/")
        try:
            answer = self._client.query_rule(input, package, rule)
        except requests.Timeout as e:
            raise PolicyEngineError(f"OPA at {self.url} timed out") from e
        except requests.HTTPError as e:
            # OPA answers an evaluation error (a rule's conflict or type error) with 500 and {"code", "message"}:
            # keep its message, which says it is the policy's error and where.
            raise PolicyEngineError(f"OPA at {self.url} failed: {_error_of(e.response)}") from e
        except requests.RequestException as e:
            raise PolicyEngineError(f"OPA at {self.url} unreachable or failed: {type(e).__name__}") from e
        except ValueError as e:
            raise PolicyEngineError(f"OPA at {self.url} answered with bad JSON: {e}") from e
        if not isinstance(answer, dict):
            raise PolicyEngineError(f"OPA at {self.url} answered {type(answer).__name__}, not an object")
        return answer.get("result", UNDEFINED)

    def healthy(self) -> bool:
        return bool(self._client.check_health())

    def close(self) -> None:
        self._client.close_connection()


def _error_of(response: Any) -> str:
    """OPA's own error text from a failed answer (its `message`, or the status)."""
    try:
        body = response.json()
        message = body.get("message") or body.get("code")
        errors = body.get("errors") or []
        detail = next((f"{x.get('code', '')}: {x.get('message', '')}" for x in errors if isinstance(x, dict)), "")
        return " ".join(part for part in (str(message or ""), detail) if part) or f"HTTP {response.status_code}"
    except Exception:  # noqa: BLE001  (a body that is not OPA's JSON: the status says enough)
        return f"HTTP {getattr(response, 'status_code', '?')}"
