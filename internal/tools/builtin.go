package tools

// builtins returns the kit's own tools in the order clients see them.
func builtins() []*Tool {
	return []*Tool{
		readTool, writeTool, editTool, applyPatchTool, lsTool, grepTool, findTool,
		bashTool, processTool, elevatedTool,
		neuronTool, snapshotTool,
		memorySearchTool, memoryGetTool, memoryUpdateTool,
	}
}
