-- Which of these budget names are declared (by any namespace).
SELECT b.name FROM workhorse.budgets b WHERE b.name = ANY(%s::text[])
