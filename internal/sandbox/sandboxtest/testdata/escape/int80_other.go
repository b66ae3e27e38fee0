//go:build !amd64

package main

func int80(trap, a1, a2, a3 uintptr) uintptr { panic("no i386 entry point on this architecture") }

const i386Keyctl = 0

const haveInt80 = false
