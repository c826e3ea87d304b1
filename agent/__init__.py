"""What the agent is (``agent.publisher``) and which model drives it (``agent.models``)."""
