// Package tools is the agent tool kit: read, write, edit, apply_patch, bash,
// process, grep, find, ls, elevated, neuron, snapshot and the memory tools,
// each acting on one neuron through its channel.
//
// Every call goes the same way (Kit.Call): the input is coerced and checked
// against the tool's JSON schema (a bad input is an error naming the field),
// the policy engine decides (deny beats ask beats allow; each decision is an
// audit fact), the tool runs under the policy's resource limits, and its
// output is redacted before anyone sees it. MCP and the agent loop are thin
// shells over Kit.Call; nothing may run a tool any other way.
//
// The package never talks to a backend by name and never reaches into a
// neuron except through its channel (*link.Client).
package tools
