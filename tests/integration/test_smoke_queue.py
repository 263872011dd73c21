from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, JobStatus


def test_enqueue_claim_complete_roundtrip(queue):
    job_id = queue.enqueue("t", {"args": [1], "kwargs": {}}, EnqueueOptions(queue="q"))
    [claimed] = queue.claim("q", 5, 30)
    assert claimed.id == job_id
    queue.complete(claimed.id, claimed.fence, {"ok": True})
    job = queue.get_job(job_id)
    assert job.status is JobStatus.SUCCEEDED and job.result == {"ok": True}


def test_per_key_claim_respects_limits(queue):
    queue.sync_concurrency_policies("ns", [ConcurrencyPolicyDefinition("q", 3, 1)])
    queue.enqueue_many(
        [("t", {}, EnqueueOptions(queue="q", concurrency_key=f"k{i % 2}")) for i in range(6)]
    )
    first = queue.claim("q", 10, 30)
    assert sorted(j.concurrency_key for j in first) == ["k0", "k1"]
    assert queue.claim("q", 10, 30) == []
    queue.complete(first[0].id, first[0].fence)
    [again] = queue.claim("q", 10, 30)
    assert again.concurrency_key == first[0].concurrency_key
