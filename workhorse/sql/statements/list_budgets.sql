-- The declared budgets (every namespace's, or one's), each with its override when it has one.
SELECT b.namespace, b.name, b.max_active, b.rate_limit, b.rate_period, b.rate_burst,
       b.created_at, b.updated_at,
       c.name IS NOT NULL
           AND (c.override_expires_at IS NULL OR c.override_expires_at > clock_timestamp())
           AS overridden,
       c.max_active, c.rate_limit, c.rate_period, c.rate_burst, c.override_set_at,
       c.override_expires_at, b.adaptive
FROM workhorse.budgets b
LEFT JOIN workhorse.budget_controls c ON c.name = b.name
WHERE (%s::text IS NULL OR b.namespace = %s::text)
ORDER BY b.namespace, b.name
