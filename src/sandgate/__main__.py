from sandgate.cli import app

app()
