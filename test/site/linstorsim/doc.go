// Package linstorsim is a stand-in for LINSTOR's controller in tests: an HTTP(S) server for
// the part of LINSTOR's REST API that Nodewright's LINSTOR client (internal/linstor) calls,
// keeping nodes, storage pools, resource groups, resource definitions, resources, volumes and
// properties in memory.
//
// Every request it receives and every answer it sends is validated against LINSTOR's own
// OpenAPI document (testdata/rest_v1_openapi.yaml, taken unchanged from linstor-server; its
// README says from where) with kin-openapi: the request's operation is found in the document
// and the request validated (openapi3filter.ValidateRequest), then the answer
// (openapi3filter.ValidateResponse, an undeclared status refused). A request or an answer that
// breaks the document is answered 500 with the reason, and recorded: Start fails the test at
// its end unless the test took it with TakeViolations. So is a request for an operation of the
// document the stand-in does not play (501), or for a part of one it does not play. The
// stand-in cannot drift from the API without a test failing. Two things of the document are
// worked around, not edited: its examples are not validated (two of them break its own
// schemas), and error answers are validated against its ApiCallRc list schema, which LINSTOR
// writes for every error, where an operation declares no such status (most declare no 404)
// or declares components/responses/OperationFailed, a single ApiCallRc LINSTOR never writes.
//
// It plays, as LINSTOR does (the messages and return codes are LINSTOR's):
//
//   - GET /v1/controller/version, and the controller's properties (GET and POST
//     /v1/controller/properties) among them BalanceResourcesEnabled;
//   - nodes: GET /v1/nodes (filter nodes), each ONLINE or OFFLINE, and POST /v1/nodes, which
//     registers a satellite (ONLINE when AddSatellite said one runs at its address);
//   - POST /v1/nodes/{node}/storage-pools, a storage pool of any provider created on a node
//     (no capacity): no upgrade makes it, but LINSTOR takes it, and the LINSTOR gate's tests
//     show the gate refusing it;
//   - GET /v1/view/storage-pools (filters nodes, storage_pools) with free and total capacity,
//     and every node's DfltDisklessStorPool;
//   - resource groups: GET /v1/resource-groups and PUT /v1/resource-groups/{resource_group}
//     (properties, the place count and storage pools of the select filter); setting the
//     place count autoplaces, within the request, every definition of the group below it;
//   - resource definitions: GET /v1/resource-definitions (with_volume_definitions) and PUT
//     /v1/resource-definitions/{resource} (properties);
//   - resources: GET /v1/view/resources (filters nodes, resources, storage_pools), with each
//     volume's disk state and its replication_states towards every peer; POST and DELETE
//     /v1/resource-definitions/{resource}/resources/{node}, diskful in a named pool (the
//     pool's free capacity checked and taken) or diskless (flag DISKLESS or DRBD_DISKLESS);
//   - properties: DrbdOptions/Resource/quorum, DrbdOptions/Resource/on-no-quorum,
//     DrbdOptions/auto-add-quorum-tiebreaker, BalanceResourcesEnabled,
//     BalanceResourcesInterval, DRBD's handlers (DrbdOptions/Handlers/<handler>, any command,
//     as LINSTOR takes them) and the Aux/ namespace, with LINSTOR's checks of their values;
//     any other key is refused as not whitelisted (LINSTOR knows more);
//   - refusals: an object not found (404), a resource that exists, a pool too small for the
//     volume ("Not enough free space available for volume 0"), not enough nodes to autoplace,
//     deleting a resource in use or the last diskful one that diskless ones still use; the
//     delete of a resource that does not exist is a warning, as in LINSTOR.
//
// A new diskful replica of a definition that already has one starts Inconsistent, a
// SyncTarget whose done_percentage rises to 100 over Options.SyncTime, then UpToDate; its
// source (the first in-sync diskful replica by node name) shows SyncSource with the same
// percentage, every other pair Established. Time is read at every request: what a client reads
// is always current, and nothing runs between requests. Options.BalanceInterval plays
// LINSTOR's balance task, which autoplaces definitions below their group's place count unless
// BalanceResourcesEnabled is "false".
//
// Fault hooks:
//
//   - Options.StalledSyncs: a synchronisation stops at a percentage and stays there;
//   - SetOnline(node, false): a satellite goes offline: its node OFFLINE, its resources'
//     state unknown (none reported), its peers' replication towards it Off and their
//     connection Connecting, its synchronisations stopped; a resource created there waits, one
//     deleted there stays (flag DELETE) until SetOnline(node, true);
//   - Options.SlowGroupModify: a resource group modify that raises the place count plays
//     linstor-server#253: never answered, placing only some definitions, slowly, some
//     replicas StandAlone;
//   - SetInUse: a resource open on its node, which LINSTOR refuses to delete.
//
// DRBD's online verify, and a mismatch it finds, run through the node agents and are played
// by package drbdplay (Kernel.Mismatch), not here: LINSTOR's REST API has no verify.
//
// It does not play: authentication beyond the TLS handshake (a bearer token is taken as
// given), LINSTOR's automatic tiebreaker (DrbdOptions/auto-add-quorum-tiebreaker is stored,
// not acted on), the autoplace endpoint, snapshots, layers other than DRBD over storage,
// node types other than satellites, several controllers, or anything between requests.
package linstorsim
