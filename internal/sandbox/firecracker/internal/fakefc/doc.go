// Package fakefc is a strict fake of Firecracker and its jailer, for the
// firecracker backend's tests only: the contract they hold the backend to
// is the real one, so a test that passes against the fake fails where the
// backend would fail against Firecracker.
//
//   - Spec loads the pinned swagger description (testdata/firecracker.yaml)
//     and validates request bodies as Firecracker's deserializers do:
//     unknown fields, missing required fields, wrong types and values
//     outside an enum are a 400 with a fault_message.
//   - Server is the API on a Unix socket with Firecracker's state machine:
//     pre-boot configuration only before InstanceStart, exactly one
//     InstanceStart, PATCH /vm only after it, snapshot/create only while
//     Paused, snapshot/load only in a fresh process (after nothing but the
//     logger and metrics), paths resolved in the jail, every call recorded.
//   - Muxer is the hybrid vsock device's host side: CONNECT <port> / OK,
//     and guest-initiated connections to <uds_path>_<port>.
//   - FirecrackerMain and JailerMain make the test binary, run under the
//     names "firecracker" and "jailer", a real executable the backend
//     launches: the jailer checks its argv as the real one does and execs
//     the fake Firecracker, whose guest is a real cortex-agent serving
//     in-process on the fake vsock.
//
// Nothing here may be used outside tests.
package fakefc
