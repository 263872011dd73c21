-- After a failed probe: leave no LISTEN behind on whatever server connection got it.
UNLISTEN *
