"""Megatron-LM's data-parallel sampler, transcribed from `megatron/training/datasets/data_samplers.py`.

Megatron-LM (not megatron-core, which is what installs here) defines `MegatronPretrainingSampler`; this is
its `__iter__` written out over sample ids, the oracle the loader's rank slicing is tested against.
"""


def megatron_pretraining_sampler(total_samples, consumed_samples, micro_batch_size, data_parallel_rank,
                                 data_parallel_size, drop_last=True):
    """The micro-batches of sample ids `MegatronPretrainingSampler` yields on one data-parallel rank."""
    per_step = micro_batch_size * data_parallel_size
    start, end = data_parallel_rank * micro_batch_size, data_parallel_rank * micro_batch_size + micro_batch_size
    batch = []
    for idx in range(consumed_samples, total_samples):
        batch.append(idx)
        if len(batch) == per_step:
            yield batch[start:end]
            batch = []
    if batch and not drop_last:
        yield batch[start:end]
