"""Certificates for kube-offload's HTTPS endpoints (webhook, extender, kubelet API).

``pki`` makes a CA and serving certificates and decides when they must be renewed (pure);
``store`` writes them atomically to files or builds the Secrets; ``directory`` generates
into / renews a directory; ``tls_secret`` keeps the CA and serving Secrets in a cluster;
``webhook_ca`` patches ``caBundle`` into webhook configurations; ``cli`` is
``kube-offload certs``. See docs/certificates.md.
"""
