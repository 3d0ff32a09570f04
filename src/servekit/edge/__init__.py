"""The single port of ``servekit up``: every AWS API request to its service, InvokeEndpoint through the gateway,
``/ping`` and ``/metrics``; and the gateway replica's front."""
