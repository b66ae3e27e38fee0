// Package mcp serves the tool kit over the Model Context Protocol (stdio and
// streamable HTTP) and attaches external MCP servers as tools, with the
// official Go SDK. It is a thin shell: every call goes through
// tools.Kit.Call, so validation, policy, limits, audit and redaction are
// the kit's, never this package's.
package mcp
