"""The images `make images` builds, as they are shipped."""
