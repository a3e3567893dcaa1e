{{- /* One peering's gateway (gateway.yaml); the local chart has the same file (tests/unit/test_charts.py keeps them equal). */ -}}
{{- define "kube-offload.gateway" -}}
{{- $v := .values }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- .labels | nindent 4 }}
    app.kubernetes.io/component: gateway
---
# Its own key Secret (the private key, made by the gateway) and ConfigMap (the CIDRs and
# the peer's key and endpoint from peer; its public key from the gateway), no other.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- .labels | nindent 4 }}
    app.kubernetes.io/component: gateway
rules:
  - apiGroups: [""]
    resources: ["secrets"]
    resourceNames: [{{ printf "%s-key" .name | quote }}]
    verbs: ["get", "update"]
  - apiGroups: [""]
    resources: ["configmaps"]
    resourceNames: [{{ .name | quote }}]
    verbs: ["get", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- .labels | nindent 4 }}
    app.kubernetes.io/component: gateway
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ .root.Release.Namespace }}
{{- if .allow }}
---
# A provider's gateway lets only the consumer's own pods use the link: it lists the pods
# the enforcer made for that consumer (by their labels, which no consumer may set).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .name }}-pods
  labels:
    {{- .labels | nindent 4 }}
    app.kubernetes.io/component: gateway
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .name }}-pods
  labels:
    {{- .labels | nindent 4 }}
    app.kubernetes.io/component: gateway
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .name }}-pods
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ .root.Release.Namespace }}
{{- end }}
---
# Where the peer's gateway sends: any node's port (NodePort, the default) or a load
# balancer's address; `kube-offload peer` reads it unless --gateway-endpoint names one.
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- .labels | nindent 4 }}
    app.kubernetes.io/component: gateway
    kube-offload.io/gateway-peer: {{ .peer }}
spec:
  type: {{ $v.service.type }}
  selector:
    {{- .selector | nindent 4 }}
    kube-offload.io/gateway-peer: {{ .peer }}
  ports:
    - name: wireguard
      port: {{ .port }}
      targetPort: {{ .port }}
      protocol: UDP
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- .labels | nindent 4 }}
    app.kubernetes.io/component: gateway
    kube-offload.io/gateway-peer: {{ .peer }}
spec:
  # One link per peering and node: two replicas would fight over it. Recreate: the old
  # pod removes its link and rules (SIGTERM) before the new one makes them again.
  replicas: 1
  strategy:
    type: Recreate
  selector:
    matchLabels:
      {{- .selector | nindent 6 }}
      kube-offload.io/gateway-peer: {{ .peer }}
  template:
    metadata:
      labels:
        {{- .selector | nindent 8 }}
        kube-offload.io/gateway-peer: {{ .peer }}
    spec:
      serviceAccountName: {{ .name }}
      # The node's network namespace: the node is the way into the tunnel for every pod
      # (the route agent sends the other nodes' packets here), and the WireGuard port is
      # the node's (docs/networking.md, docs/security.md "The gateway").
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      {{- with .root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        seccompProfile:
          type: RuntimeDefault
      terminationGracePeriodSeconds: 30
      containers:
        - name: gateway
          image: {{ .image }}
          imagePullPolicy: {{ .root.Values.image.pullPolicy }}
          env:
            - name: HOST_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.hostIP
          args:
            - gateway
            - --peer-id={{ .peer }}
            - --namespace={{ .root.Release.Namespace }}
            - --config-map={{ .name }}
            - --key-secret={{ .name }}-key
            - --listen-port={{ .port }}
            - --wireguard={{ $v.wireguard }}
            - --iptables={{ $v.iptables }}
            - --resync={{ $v.resync }}
            {{- with .allow }}
            - --allow-pods-of={{ . }}
            {{- end }}
            - --log-level={{ .root.Values.logLevel }}
            # On the node's own address only: the pod shares the node's network.
            - --health-bind=$(HOST_IP):{{ .health }}
            {{- range $v.extraArgs }}
            - {{ . }}
            {{- end }}
          ports:
            - name: wireguard
              containerPort: {{ .port }}
              protocol: UDP
            - name: health
              containerPort: {{ .health }}
              protocol: TCP
          readinessProbe:
            httpGet:
              path: /readyz
              port: health
            periodSeconds: 5
          livenessProbe:
            httpGet:
              path: /healthz
              port: health
            periodSeconds: 20
            failureThreshold: 6
          # root with NET_ADMIN only (links, routes, iptables in the node's namespace):
          # a non-root user would not keep the capability (no ambient capabilities).
          securityContext:
            runAsUser: 0
            runAsGroup: 0
            runAsNonRoot: false
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
              add: ["NET_ADMIN"]
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            # wireguard-go's control socket, where wg finds it
            - name: wireguard
              mountPath: /var/run/wireguard
            # the TUN device wireguard-go needs where the kernel has no WireGuard
            - name: tun
              mountPath: /dev/net/tun
            # the node's iptables lock, shared with kube-proxy and the network plugin
            - name: xtables-lock
              mountPath: /run/xtables.lock
      volumes:
        - name: tmp
          emptyDir: {}
        - name: wireguard
          emptyDir: {}
        - name: tun
          hostPath:
            path: /dev/net/tun
            type: CharDevice
        - name: xtables-lock
          hostPath:
            path: /run/xtables.lock
            type: FileOrCreate
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{- /* The route agent of every node (one DaemonSet per release). */ -}}
{{- define "kube-offload.gatewayRoutes" -}}
{{- $v := .values }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- .labels | nindent 4 }}
    app.kubernetes.io/component: gateway-routes
---
# Which gateways exist (their ConfigMaps: the peer's range) and where their pods run.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- .labels | nindent 4 }}
    app.kubernetes.io/component: gateway-routes
rules:
  - apiGroups: [""]
    resources: ["configmaps", "pods"]
    verbs: ["list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- .labels | nindent 4 }}
    app.kubernetes.io/component: gateway-routes
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ .root.Release.Namespace }}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- .labels | nindent 4 }}
    app.kubernetes.io/component: gateway-routes
spec:
  selector:
    matchLabels:
      {{- .selector | nindent 6 }}
  template:
    metadata:
      labels:
        {{- .selector | nindent 8 }}
    spec:
      serviceAccountName: {{ .name }}
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      {{- with .root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: routes
          image: {{ .image }}
          imagePullPolicy: {{ .root.Values.image.pullPolicy }}
          env:
            - name: HOST_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.hostIP
          args:
            - gateway-routes
            - --node-ip=$(HOST_IP)
            - --namespace={{ .root.Release.Namespace }}
            - --resync={{ $v.resync }}
            - --log-level={{ .root.Values.logLevel }}
            - --health-bind=$(HOST_IP):{{ $v.routeAgent.healthPort }}
          ports:
            - name: health
              containerPort: {{ $v.routeAgent.healthPort }}
              protocol: TCP
          readinessProbe:
            httpGet:
              path: /readyz
              port: health
            periodSeconds: 10
          livenessProbe:
            httpGet:
              path: /healthz
              port: health
            periodSeconds: 20
            failureThreshold: 6
          securityContext:
            runAsUser: 0
            runAsGroup: 0
            runAsNonRoot: false
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
              add: ["NET_ADMIN"]
          resources:
            {{- toYaml $v.routeAgent.resources | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
      volumes:
        - name: tmp
          emptyDir: {}
      # Not on virtual nodes: routes belong to real nodes' kernels.
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - key: kube-offload.io/type
                    operator: NotIn
                    values: [virtual-node]
      {{- with $v.routeAgent.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.routeAgent.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}
