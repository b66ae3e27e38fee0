package qemu

import (
	"context"
	"os/exec"
	"strings"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/vmimage"
)

// SelfCheck reports whether qemu mode can run here: QEMU, mkfs.ext4, the
// VM image, and the accelerator. It is OK only with KVM: under TCG the
// mode works (--mode qemu) but boots take seconds, so auto must not pick
// it; the summary says so.
func SelfCheck(ctx context.Context, env sandbox.Env) (c sandbox.Check) {
	c = sandbox.Check{Mode: Mode, Isolating: true}
	q := sandbox.CheckItem{Name: "qemu-system-x86_64"}
	mk := sandbox.CheckItem{Name: "mkfs.ext4"}
	img := sandbox.CheckItem{Name: "VM image"}
	acc := sandbox.CheckItem{Name: "accelerator"}
	defer func() { c.Items = []sandbox.CheckItem{q, mk, img, acc} }()
	bin, err := binary()
	if err != nil {
		q.Detail = err.Error()
	} else {
		q.OK, q.Detail = true, bin+" "+qemuVersion(ctx, bin)
	}
	if p, err := vmimage.Mkfs(); err == nil {
		mk.OK, mk.Detail = true, p+" makes overlay disks"
	} else {
		mk.Detail = err.Error()
	}
	dir := vmimage.DefaultDir(env.Layout)
	im, err := vmimage.Open(dir)
	if err != nil {
		img.Detail = err.Error()
	} else {
		img.OK, img.Detail = true, dir+" (kernel "+im.Manifest.KernelVersion+")"
	}
	switch {
	case !q.OK:
		acc.Detail = "needs QEMU"
	case !img.OK:
		acc.Detail = "needs the image's kernel to probe KVM"
	default:
		a, err := chooseAccel(ctx, bin, im)
		if err != nil {
			acc.Detail = err.Error()
		} else {
			acc.OK, acc.Detail = a.KVM, a.String()
		}
	}
	switch {
	case !q.OK:
		c.Summary = q.Detail
	case !mk.OK:
		c.Summary = mk.Detail
	case !img.OK:
		c.Summary = "no VM image: nsys-cortex image build --vm"
	case !acc.OK:
		c.Summary = "TCG only, software emulation (seconds per boot): --mode qemu uses it, auto does not"
	default:
		c.OK, c.Summary = true, "ready (KVM)"
	}
	return c
}

func qemuVersion(ctx context.Context, bin string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(strings.TrimPrefix(first, "QEMU emulator "))
}
