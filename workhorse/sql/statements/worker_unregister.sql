DELETE FROM workhorse.workers WHERE id = %s
