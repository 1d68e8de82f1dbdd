"""Conversations: what a follow-up question retrieves on (``node``), with or without a chat
model (``carry_over``, ``condense``), and the conversation as the graph takes it (``history``)."""
