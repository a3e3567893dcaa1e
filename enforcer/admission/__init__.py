"""The enforcer's validating webhooks: ``webhook_server`` (HTTPS, AdmissionReview in and
out, metrics) over ``caches`` (Namespaces, Consumers and reflected ServiceAccounts, with
one live read on a miss); for ShadowPods, ``shadowpod_webhook`` (the glue) deciding with
``validation`` (the static rules, pure: ``pod_policy``, the provider policy's pod rules;
``quota_rules``, what keeps the quota counting what runs), ``ledger`` (admissions not yet
cached, so two concurrent creates cannot both take the last of a quota) and ``dry_run``
(the provider's API server judges the very Pod); for consumers' EndpointSlices,
``endpointslice_webhook`` deciding with ``endpointslice_policy`` (pure); and
``registration`` (the ValidatingWebhookConfiguration, for ``enforcer configuration``).
"""
