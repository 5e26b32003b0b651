"""The PCIe selector (which devices gpunode tunes) and the base of every profile model."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from gpunode.profile.allowed import CLASS_ID, HEX_ID, UserValues, shown


class ProfileModel(UserValues):
    """Base for every profile model: unknown keys are errors, values are frozen, text is one
    line (UserValues)."""


class PcieSelector(ProfileModel):
    """Which PCIe functions the MaxReadReq setting touches; nothing else is ever written."""

    vendor: str = Field(
        "10de",
        description="PCI vendor id, 4 lowercase hex digits (10de = NVIDIA). Required: a "
        "selector without a vendor would write every bridge or controller of a class.",
    )
    device: str | None = Field(None, description="PCI device id, 4 hex digits; None = any")
    classes: list[str] = Field(
        ["0300", "0302"],
        max_length=16,
        description="PCI class codes (0300 VGA, 0302 3D controller; 2 digits = a whole base "
        "class). A device matches when its class equals or starts with one of them.",
    )

    @field_validator("vendor", "device", mode="before")
    @classmethod
    def _hex_id(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            if info.field_name == "vendor":
                raise ValueError(
                    "a selector must name a vendor (e.g. '10de' for NVIDIA): without one it "
                    "would select every device of its classes, bridges included"
                )
            return None
        text = str(value).lower().removeprefix("0x")
        if not HEX_ID.fullmatch(text):
            raise ValueError(f"{shown(value)} is not a PCI id: use 4 hex digits such as '10de'")
        return text

    @field_validator("classes", mode="before")
    @classmethod
    def _class_ids(cls, value: object) -> object:
        if not isinstance(value, list) or not value:
            raise ValueError("give a non-empty list of PCI class codes such as ['0300', '0302']")
        out = []
        for item in value:
            text = str(item).lower().removeprefix("0x")
            if not CLASS_ID.fullmatch(text):
                raise ValueError(f"{shown(item)} is not a PCI class code: use 2 or 4 hex digits")
            out.append(text)
        return out
