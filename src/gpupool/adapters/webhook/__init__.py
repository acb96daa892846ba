"""The admission webhook (AdmissionReview v1 over HTTPS, aiohttp).

`mutate` and `review` decide (pure); `server` parses, calls them and answers; `lookups` reads
namespaces and GpuQuotas; `certs` makes the serving certificate; `register` writes the webhook
configurations; `runner` puts it together for `gpupool webhook`.
"""
