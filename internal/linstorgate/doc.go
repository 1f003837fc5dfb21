// Package linstorgate is the LINSTOR gate (cmd/nodewright-linstor-gate): the one holder of
// LINSTOR's client certificate, in front of the site's LINSTOR controller, so that the
// operator, which may be compromised, is no LINSTOR administrator.
//
// LINSTOR's client certificate is an administrator's: with it, a client can set
// DrbdOptions/Handlers/* properties, which LINSTOR writes into the resource files' handlers
// section and drbdadm runs as root on the nodes; register a satellite of its own and place
// replicas on it; or delete every resource. The gate forwards only what a ReplicationUpgrade
// asks of LINSTOR (internal/linstor's calls), as the Allowlist says, one table of method, path,
// query parameters, body fields and property keys with their values:
//
//   - reads: the controller's version and properties, nodes, storage pools, resource groups,
//     resource definitions and the resource view;
//   - the controller property BalanceResourcesEnabled (the balance task paused and put back);
//   - a resource group's place count and its DrbdOptions/Resource/quorum and on-no-quorum;
//   - a resource created on a named node in a named pool, or diskless, which the gate stamps
//     with linstor.GateStampProp;
//   - the deletion of a resource that carries the stamp, never of the last diskful replica
//     nor of the only one known UpToDate (the gate reads LINSTOR's state itself, and deletes
//     of one definition go one at a time);
//   - with --register-nodes only, the registration of a Kubernetes Node's satellite at its
//     InternalIP, as the gate reads the Node itself.
//
// It refuses everything else with 403 and a JSON body naming the method, the path, the rule
// and the property, parameter or field at fault (Refusal). It parses every body it admits
// and forwards its own encoding of what it read, so that LINSTOR never parses the operator's
// bytes; paths and queries are rebuilt the same way.
//
// The operator authenticates with a ServiceAccount token the kubelet projects into its pod
// for the gate's audience (DefaultAudience); the gate checks it with a TokenReview: the
// audience, the operator's ServiceAccount, and a token bound to a pod (Authenticator). The
// gate's upstream, LINSTOR's URL and client Secret, come from the gate's own flags, never from
// the operator.
//
// Every refusal and every forwarded change is recorded in the gate's own audit trail
// (internal/audit), which the operator cannot write, and logged.
package linstorgate
