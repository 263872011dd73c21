-- A supervisor's row, with the task names its app declares (health counts a queue's ready jobs
-- of any other task as unknown_task_ready). worker_register.sql is the 0.2.0 form, without them.
INSERT INTO workhorse.workers (app, host, pid, slots, queues, stats, tasks)
VALUES (%s, %s, %s, %s, %s::text[], %s::jsonb, %s::text[])
RETURNING id
