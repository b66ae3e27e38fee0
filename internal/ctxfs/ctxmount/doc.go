// Package ctxmount is what other processes need to know of a CortexFS
// mount without serving one: how it shows in the mount table, how to
// validate it, and the record a running mount leaves on the host. It
// links no FUSE library, so a command that only looks for /ctx (nsbox's
// create binding it into a neuron) does not initialise one.
package ctxmount
