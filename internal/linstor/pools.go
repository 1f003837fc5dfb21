package linstor

import (
	"context"
	"fmt"

	lapi "github.com/LINBIT/golinstor/client"
)

// StoragePool is a storage pool on a node.
type StoragePool struct {
	Node, Name string
	// Provider is LINSTOR's provider kind: LVM, LVM_THIN, ZFS, ZFS_THIN, FILE, FILE_THIN,
	// DISKLESS...
	Provider string
	// FreeKiB and TotalKiB are the pool's free and total capacity as the satellite last
	// reported them; a diskless pool has none.
	FreeKiB, TotalKiB int64
}

// Diskless reports whether the pool holds no data: DRBD clients and tiebreakers live there.
func (p StoragePool) Diskless() bool { return p.Provider == string(lapi.DISKLESS) }

// Fits reports whether a new replica of sizeKiB (the definition's volumes together) fits in
// the pool's free capacity. A thin pool may hold more than that; this is the safe reading.
func (p StoragePool) Fits(sizeKiB int64) bool { return !p.Diskless() && p.FreeKiB >= sizeKiB }

// StoragePools lists the storage pools of the named nodes (every node's when none), diskless
// ones included.
func (c *Client) StoragePools(ctx context.Context, nodes ...string) ([]StoragePool, error) {
	op := "list storage pools"
	opts := &lapi.ListOpts{Node: nodes}
	if len(nodes) > 0 {
		op = fmt.Sprintf("list the storage pools of %q", nodes)
	}
	var pools []lapi.StoragePool
	err := c.call(ctx, op, func(ctx context.Context) (err error) {
		pools, err = c.api.Nodes.GetStoragePoolView(ctx, opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]StoragePool, 0, len(pools))
	for _, p := range pools {
		out = append(out, StoragePool{
			Node: p.NodeName, Name: p.StoragePoolName, Provider: string(p.ProviderKind),
			FreeKiB: p.FreeCapacity, TotalKiB: p.TotalCapacity,
		})
	}
	return out, nil
}
