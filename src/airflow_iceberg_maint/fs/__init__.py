"""Where tables live: location parsing and validation, listing and deleting files, conditional writes."""
