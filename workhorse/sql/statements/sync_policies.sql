-- Desired policies of one namespace, with fairness ('fifo' or 'key'), on_key_full and rate bursts.
SELECT sync_action, sync_queue
FROM workhorse.sync_concurrency_policies_v2(
    %s::text, %s::text[], %s::integer[], %s::integer[], %s::integer[], %s::double precision[],
    %s::integer[], %s::double precision[], %s::boolean, %s::text[], %s::text[], %s::integer[],
    %s::integer[])
