-- workhorse.pytest_plugin: a test database, copied from a template (names composed as identifiers).
CREATE DATABASE {name} TEMPLATE {template}
