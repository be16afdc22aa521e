// Empty until the readers land; keeps the object library non-empty.
