"""The tool classifiers, one module per tool, each registered by command name behind one interface.

`classifier_for(name)` is what `guardrail.actions.normalise.Normaliser.dispatch` calls. Importing this package
imports every classifier module so that they register themselves.
"""

from guardrail.actions.classifiers import (  # noqa: F401  (imported for registration)
    containers,
    curl,
    files,
    helm,
    helpers,
    kubectl,
    mysql,
    postgres,
    readers,
    redis,
    staples,
)
from guardrail.actions.classifiers.base import Classifier, classifier_for, register, registered

__all__ = ["Classifier", "classifier_for", "register", "registered"]
