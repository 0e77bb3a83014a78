"""Built-in kernel families. Each is a pluggy plugin the provider core registers by module name."""
