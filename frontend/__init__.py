"""Browser pages: my orders, the live order page, ordering, and the operator dashboard."""
