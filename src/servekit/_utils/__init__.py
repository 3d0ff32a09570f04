"""Small helpers shared by every layer."""
