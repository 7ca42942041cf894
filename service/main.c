/* Placeholder until the service lands. */
int main(void) { return 0; }
