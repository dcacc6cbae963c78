"""Delivery of stored lines to destinations, and the network guard every outbound connection uses."""
