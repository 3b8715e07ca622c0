"""The base of every configuration section: strict fields, no NaN, no booleans as numbers."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationInfo,
    field_validator,
)


class _Section(BaseModel):
    # allow_inf_nan=False: no float field of any section may be NaN or ±inf.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, value: Any, info: ValidationInfo) -> Any:
        """Strict numbers: ``true``/``false`` are not 1/0 for an int or float field."""
        if isinstance(value, bool) and info.field_name is not None:
            ann = cls.model_fields[info.field_name].annotation
            allowed = {ann, *typing.get_args(ann)}
            if bool not in allowed and Any not in allowed and (int in allowed or float in allowed):
                raise ValueError(f"expected a number, not the boolean {value}")
        return value
