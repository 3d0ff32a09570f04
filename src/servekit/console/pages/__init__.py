"""The console's pages, one module per page or family of pages: each owns its route handlers and the HTML they
render, and gives :func:`servekit.console.app.create_app` its routes (``routes(console)``)."""
