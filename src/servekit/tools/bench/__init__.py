"""``servekit bench``: a load generator for any model server speaking TF Serving REST, KServe V2 or SageMaker.

Modules: ``spec`` (what a run asks for), ``workload`` (endpoints and request bodies), ``client`` (the
keep-alive HTTP/1.1 client and its measured capacity), ``loop`` (closed- and open-loop drivers), ``stats``
(percentiles and the report), ``progress`` (live display), ``wrk`` (the optional wrk engine), ``runner``
(ties them together) and ``selftest`` (measures the client's own ceiling).
"""
