"""Samplers (Reverb: selectors) decide which windows come back."""

from recollect.samplers.base import Sampler, WindowDraw
from recollect.samplers.uniform import Uniform

__all__ = ["Sampler", "Uniform", "WindowDraw"]
