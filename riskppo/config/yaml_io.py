"""YAML for configurations: PyYAML's safe loader, strict where silence would mislead.

A key given twice in one mapping is refused (PyYAML keeps the last one silently), and every
problem of the text (not UTF-8, not YAML, an integer too long to convert, nested too deeply) is
a :class:`YAMLProblem`: one line, which :mod:`riskppo.config` turns into a ``ConfigError``
naming the file or the ``--set`` key.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

__all__ = ["YAMLProblem", "YAMLSyntaxError", "decode_yaml_bytes", "load_yaml", "short"]


class YAMLProblem(ValueError):
    """Why a YAML text cannot be a configuration (one line)."""


class YAMLSyntaxError(YAMLProblem):
    """The text is not YAML at all (``--set`` then takes it as a plain string)."""


def short(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (with "…"), for quoting input in errors."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that raises :class:`YAMLProblem` on a key given twice in a mapping
    (keys brought in by a ``<<`` merge may still be overridden, as YAML allows)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                earlier = first.setdefault(key, key_node)
            except TypeError:  # an unhashable key: PyYAML's own error follows
                continue
            if earlier is not key_node:
                raise YAMLProblem(
                    f"duplicate key {short(key)} on line {key_node.start_mark.line + 1} (first "
                    f"on line {earlier.start_mark.line + 1})"
                )
        return super().construct_mapping(node, deep=deep)


def decode_yaml_bytes(data: bytes) -> str:
    """The text of a YAML file: UTF-8 (a BOM allowed), else :class:`YAMLProblem`."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise YAMLProblem(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); a config is "
            "a YAML text file"
        ) from None


def load_yaml(text: str) -> Any:
    """Parse one YAML document with :class:`_UniqueKeyLoader`; :class:`YAMLProblem` on any
    problem."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise YAMLSyntaxError(f"not valid YAML: {' '.join(str(exc).split())[:300]}") from None
    except RecursionError:
        raise YAMLProblem("YAML nested too deeply") from None
    except YAMLProblem:
        raise
    except ValueError as exc:  # int() of a too long number, a date like 2020-13-45
        if "digits" in str(exc):
            limit = sys.get_int_max_str_digits()
            raise YAMLProblem(f"an integer of more than {limit} digits") from None
        raise YAMLProblem(f"unreadable value: {' '.join(str(exc).split())[:200]}") from None
