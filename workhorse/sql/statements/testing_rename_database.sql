ALTER DATABASE {name} RENAME TO {new_name}
