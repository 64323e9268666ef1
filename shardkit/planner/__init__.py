"""Predict what each node of a cluster reads from storage, step by step through a run (`shardkit plan`)."""

from .geometry import bytes_per_sample, coverage
from .model import Cluster, Interval, IOPlan, StreamShape, plan_io, plan_loader

__all__ = ["Cluster", "IOPlan", "Interval", "StreamShape", "bytes_per_sample", "coverage", "plan_io",
           "plan_loader"]
