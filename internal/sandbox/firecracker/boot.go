package firecracker

import (
	"context"
	"fmt"
)

// vmShape is a VM's size, worked out from a create's options.
type vmShape struct {
	memMiB, vcpus int
	cpus          float64
}

// configure sets up a fresh Firecracker for a cold boot and starts the
// guest. It sends no network interface: a neuron's network is none.
func configure(ctx context.Context, c *Client, shape vmShape, bootArgs string) error {
	steps := []struct {
		what string
		do   func() error
	}{
		{"logger", func() error { return c.PutLogger(ctx, Logger{LogPath: jailLog, Level: "Warning"}) }},
		{"metrics", func() error { return c.PutMetrics(ctx, Metrics{MetricsPath: jailMetrics}) }},
		{"machine", func() error {
			return c.PutMachineConfig(ctx, MachineConfig{VCPUCount: shape.vcpus, MemSizeMiB: shape.memMiB})
		}},
		{"boot source", func() error {
			return c.PutBootSource(ctx, BootSource{KernelImagePath: jailKernel, InitrdPath: jailInitrd, BootArgs: bootArgs})
		}},
		{"root disk", func() error {
			return c.PutDrive(ctx, Drive{DriveID: driveRoot, PathOnHost: jailRootDisk, IsReadOnly: true})
		}},
		// Writeback: the guest's fsync reaches the host file (Firecracker's
		// default, Unsafe, drops flushes), so what an agent saved survives a
		// host crash too.
		{"overlay disk", func() error {
			return c.PutDrive(ctx, Drive{DriveID: driveOverlay, PathOnHost: jailOverlay, CacheType: "Writeback"})
		}},
		{"config disk", func() error {
			return c.PutDrive(ctx, Drive{DriveID: driveConfig, PathOnHost: jailConfig, IsReadOnly: true})
		}},
		{"vsock", func() error { return c.PutVsock(ctx, Vsock{GuestCID: GuestCID, UDSPath: jailVsock}) }},
		{"start", func() error { return c.Action(ctx, ActionInstanceStart) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("configuring the VM (%s): %w", s.what, err)
		}
	}
	return nil
}

// load restores a snapshot into a fresh Firecracker (nothing but the
// logger and metrics configured before) and resumes it.
func load(ctx context.Context, c *Client) error {
	steps := []struct {
		what string
		do   func() error
	}{
		{"logger", func() error { return c.PutLogger(ctx, Logger{LogPath: jailLog, Level: "Warning"}) }},
		{"metrics", func() error { return c.PutMetrics(ctx, Metrics{MetricsPath: jailMetrics}) }},
		{"snapshot", func() error {
			return c.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: jailSnapState,
				MemBackend: &MemoryBackend{BackendType: "File", BackendPath: jailSnapMem}})
		}},
		{"resume", func() error { return c.PatchVM(ctx, VMResumed) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("restoring the VM (%s): %w", s.what, err)
		}
	}
	return nil
}
