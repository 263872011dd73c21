-- enqueue.sql for a batch whose jobs share one EnqueueOptions (Task.map, a backlog fill):
-- each option is sent once and repeated here (array_fill, to the batch size sent after it), not
-- dumped and parsed once a job. A unique job's digest differs by job (its arguments), so it is
-- sent per job.
SELECT e.id, e.duplicate FROM workhorse.enqueue_v2(
    %b::text[],
    array_fill(%b::text, ARRAY[%b::integer]),
    array_fill(%b::text, ARRAY[%b::integer]),
    array_fill(%b::smallint, ARRAY[%b::integer]),
    %b::text[],
    array_fill(%b::timestamptz, ARRAY[%b::integer]),
    array_fill(%b::double precision, ARRAY[%b::integer]),
    array_fill(%b::integer, ARRAY[%b::integer]),
    %b::text[],
    %b::text[],
    array_fill(%b::text, ARRAY[%b::integer]),
    NULL,
    %b::text[],
    array_fill(%b::double precision, ARRAY[%b::integer]),
    array_fill(%b::text, ARRAY[%b::integer]),
    array_fill(%b::text, ARRAY[%b::integer]),
    array_fill(%b::text, ARRAY[%b::integer]),
    array_fill(%b::integer, ARRAY[%b::integer]),
    array_fill(%b::integer, ARRAY[%b::integer]),
    array_fill(%b::smallint, ARRAY[%b::integer]),
    array_fill(%b::text, ARRAY[%b::integer]),
    array_fill(%b::text, ARRAY[%b::integer]),
    array_fill(%b::timestamptz, ARRAY[%b::integer]),
    array_fill(%b::double precision, ARRAY[%b::integer]),
    array_fill(%b::timestamptz, ARRAY[%b::integer]),
    array_fill(%b::double precision, ARRAY[%b::integer])) AS e
