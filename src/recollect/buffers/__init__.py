"""Buffers compose storage and a sampler and do the windowing."""

from recollect.buffers.replay_buffer import ReplayBuffer
from recollect.buffers.sample import BufferInfo, Sample
from recollect.buffers.transition_buffer import TransitionBuffer, TransitionSample

__all__ = ["BufferInfo", "ReplayBuffer", "Sample", "TransitionBuffer", "TransitionSample"]
