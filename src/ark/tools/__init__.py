"""The tools an agent uses on a graph: ARK's global search and neighborhood exploration, and ARK-V1's."""
