"""What the agent is (``agent.publisher``), which model drives it (``agent.models``) and the budget
it runs under (``workflow.budget``; its text, ``workflow.observe.budget_view``, never imports the SDK)."""
