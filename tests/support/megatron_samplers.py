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


def megatron_pretraining_random_sampler(total_samples, consumed_samples, micro_batch_size, data_parallel_rank,
                                        data_parallel_size, data_sharding):
    """One `__iter__` of `MegatronPretrainingRandomSampler` (without its RandomSeedDataset hook), as written in
    Megatron-LM: yields (micro-batch of sample ids, consumed_samples after it)."""
    import torch  # noqa: PLC0415 - the oracle needs torch's own randperm, as Megatron-LM does

    per_step = micro_batch_size * data_parallel_size
    last_batch_size = total_samples % per_step
    active_total_samples = total_samples - last_batch_size
    epoch = consumed_samples // active_total_samples
    current_epoch_samples = consumed_samples % active_total_samples
    assert current_epoch_samples % per_step == 0
    if data_sharding:
        bucket_size = (total_samples // per_step) * micro_batch_size
        bucket_offset = current_epoch_samples // data_parallel_size
        start_idx = data_parallel_rank * bucket_size
        g = torch.Generator()
        g.manual_seed(epoch)
        random_idx = torch.randperm(bucket_size, generator=g).tolist()
        idx_range = [start_idx + x for x in random_idx[bucket_offset:]]
    else:
        full_bucket_size = (total_samples // micro_batch_size) * micro_batch_size
        g = torch.Generator()
        g.manual_seed(epoch)
        idx_range_total = torch.randperm(full_bucket_size, generator=g).tolist()
        idx_range = idx_range_total[current_epoch_samples:][data_parallel_rank::data_parallel_size]
    batch = []
    for idx in idx_range:
        batch.append(idx)
        if len(batch) == micro_batch_size:
            consumed_samples += per_step
            yield batch, consumed_samples
            batch = []
