//go:build !(linux && amd64)

package kvmprobe

import "runtime"

func runGuest(device string) *Result {
	return &Result{Stage: "arch", Detail: "the KVM probe guest is written for x86_64; this is " + runtime.GOOS + "/" + runtime.GOARCH}
}
