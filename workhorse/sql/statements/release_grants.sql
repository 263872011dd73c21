-- A claiming process that stops gives its capacity grants back at once instead of at their
-- expiry, so that the claimers that stay share its units out (its jobs still running count as
-- outside every grant, as for a grant that expired).
DELETE FROM workhorse.capacity_grants WHERE holder = %s
