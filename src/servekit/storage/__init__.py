"""URI-addressed storage on fsspec: plain paths and file:// built in; s3:// etc. with their extras."""

from servekit.storage.fs import Storage

__all__ = ["Storage"]
