"""The explorer's pages (scripts run by st.navigation in app/Home.py) and their shared parts."""
