//go:build !linux

package link

// No doorbell off Linux: agents run on Linux only.
func makeDoorbell(string, *Owner) {}
func ringAsync(string)            {}
