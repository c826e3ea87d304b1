"""What the agent is (``agent.publisher``), which model drives it (``agent.models``) and the budget
it runs under (``agent.budget``; its text, ``agent.budget_view``, never imports the SDK)."""
