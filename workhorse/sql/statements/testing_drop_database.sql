-- workhorse.pytest_plugin: drop a test database, ending the connections still open to it.
DROP DATABASE IF EXISTS {name} WITH (FORCE)
