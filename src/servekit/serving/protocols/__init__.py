"""Thin protocol adapters: wire format <-> inference schema, ErrorCode <-> status."""
