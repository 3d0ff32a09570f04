"""STS on ``servekit up``'s port: who the calling key is, in the home's account."""
